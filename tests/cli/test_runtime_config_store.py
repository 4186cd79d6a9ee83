"""One settings store (issue 40 item 3): every rule's settings reach ``stepwatch config``, its checks, the docs
table and a running engine from the settings class the rule declares, with no second list.

The toy rule below is what a new rule with its own settings writes: its module (a settings dataclass and a
``JobRule``) and its registry line (here: the registry's list, patched). Nothing else is edited, and it is in
the config keys, their validation, ``config set --help``, the docs table and the engine's apply path.
"""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path
from typing import ClassVar

import pytest

from stepwatch import runtime_config
from stepwatch.commands.config import runtime_fields_help
from stepwatch.config import Settings
from stepwatch.models import engine as engine_module
from stepwatch.models import registry
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.hang.settings import HangSettings
from stepwatch.models.jobhealth.settings import JobHealthSettings
from stepwatch.models.rule import JobRule, RuleSpec
from stepwatch.models.settings import DetectionSettings
from stepwatch.models.settings_store import SettingsStore, section_of
from stepwatch.models.steps.settings import StragglerSettings
from stepwatch.models.tunable import runtime
from stepwatch.models.wire.events import parse_event

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


# -- the toy rule: its module ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, kw_only=True)
class ToySettings:
    """A new rule's settings: a section name (the tree does not hold it), runtime fields with ranges, a check."""

    SECTION: ClassVar[str] = "toy"

    limit: int = runtime(3, low=1, high=100, why="a ring of this many steps")
    floor: int = runtime(1, low=0, high=100)
    buffer: int = 64  # start-up only

    def check(self) -> None:
        if self.floor > self.limit:
            raise ValueError("toy: need floor <= limit")


class ToyRule(JobRule):
    spec = RuleSpec(name="toy", consumes=frozenset(), alert_types=(), failure_classes=(), settings=ToySettings)

    def __init__(self, job, env, needs) -> None:
        self.settings = env.settings_for(ToySettings, job.job)

    def reconfigure(self, settings: ToySettings) -> None:
        self.settings = settings

    def open_alerts(self):
        return []

    def close(self, *, at, resolution, reason):
        return []


@pytest.fixture
def toy_registered(monkeypatch):
    """The toy rule's registry line (the engine reads the registry's lists by the names it imported)."""
    rules = (*registry.JOB_RULES, ToyRule)
    for module in (registry, engine_module):
        monkeypatch.setattr(module, "JOB_RULES", rules)
        monkeypatch.setattr(module, "FEED_ORDER", (*registry.FEED_ORDER, ToyRule))


def _step(job: str, rank: int = 0, step: int = 1) -> object:
    return parse_event({"v": 1, "kind": "step", "job": job, "rank": rank, "step": step, "ts": 1000.0 + step,
                            "step_time": 1.0})


def test_a_rule_with_its_own_settings_is_in_every_place_config_reads_without_another_edit(toy_registered):
    assert runtime_config.sections()["toy"] is ToySettings and "toy" in runtime_config.job_sections()
    assert runtime_config.parse_assignments(["toy.limit=7"]) == {"toy": {"limit": 7}}
    for item, message in [("toy.limit=0", r"toy\.limit=0: expected 1 to 100 \(a ring of this many steps\)"),
                          ("toy.buffer=8", r"toy\.buffer can only be set at start-up \(STEPWATCH_TOY_BUFFER\)"),
                          ("toy.nope=1", r"unknown setting toy\.nope")]:
        with pytest.raises(ValueError, match=message):
            runtime_config.parse_assignments([item])
    with pytest.raises(ValueError, match="toy: need floor <= limit"):  # the class's check, as ``config set`` runs it
        runtime_config.validate_all({"toy": {"floor": 5}}, Settings())
    assert "| `toy.limit` | 3 | 1 to 100 (a ring of this many steps) | `*` or a job |" in runtime_config.runtime_table()
    assert "toy.limit (default 3; 1 to 100)" in runtime_fields_help()
    assert "toy.buffer" not in runtime_config.runtime_table()


def test_a_rule_with_its_own_settings_takes_them_from_the_config_topic_per_job(toy_registered):
    engine = DetectionEngine(Settings())
    config = runtime_config.RuntimeConfig(Settings())
    for job in ("a", "b"):
        engine.process(_step(job))
    toy = {job: engine.jobs[job].rule("toy") for job in ("a", "b")}
    assert toy["a"].settings == ToySettings()
    config.apply(engine, "*", runtime_config.encode({"toy": {"limit": 9}}))
    config.apply(engine, "b", runtime_config.encode({"toy": {"limit": 4, "floor": 2}}))
    assert (toy["a"].settings.limit, toy["b"].settings.limit, toy["b"].settings.floor) == (9, 4, 2)
    engine.process(_step("c"))  # a new job gets the default in force
    assert engine.jobs["c"].rule("toy").settings.limit == 9
    with pytest.raises(ValueError, match="toy: need floor <= limit"):  # refused whole: nothing changes
        config.apply(engine, "a", runtime_config.encode({"toy": {"limit": 2, "floor": 3}}))
    assert toy["a"].settings.limit == 9 and "a" not in config.scopes
    config.apply(engine, "b", None)  # tombstone: back to the default
    assert toy["b"].settings == ToySettings(limit=9)
    assert config.as_dict()["effective_default"]["toy"]["limit"] == 9


def test_the_docs_table_is_the_one_the_store_gives():
    text = DOCS.read_text()
    table = re.search(r"<!-- runtime-table: begin -->\n(.*?)<!-- runtime-table: end -->", text, re.S)
    assert table is not None, "docs/configuration.md lost its runtime table markers"
    assert table.group(1) == runtime_config.runtime_table(), \
        "docs/configuration.md's runtime table is stale: paste stepwatch.runtime_config.runtime_table()"


def test_every_section_of_the_tree_a_rule_takes_is_named_by_its_field():
    tree = {f.name: f.default_factory for f in dataclasses.fields(DetectionSettings)}
    for section, cls in runtime_config.sections().items():
        assert section_of(cls) == section and tree[section] is cls
    # Per job or the worker's is what the registry says: a class a per-job rule takes is set per job.
    per_job = {r.spec.settings for r in registry.JOB_RULES}
    assert {s for s, c in runtime_config.sections().items() if c in per_job} == set(runtime_config.job_sections())


# -- the store against the layering it replaces: generated sequences of changes --------------------------------

CLASSES = (StragglerSettings, HangSettings, JobHealthSettings)
JOBS = ("a", "b", "timed")


def _variant(cls: type, rng: random.Random):
    name = {StragglerSettings: "window", HangSettings: "timeout_seconds", JobHealthSettings: "comm_window"}[cls]
    return cls(**{name: type(getattr(cls(), name))(rng.randint(2, 50))})


@pytest.mark.parametrize("seed", range(20))
def test_the_store_gives_a_jobs_own_else_the_default_else_the_environments(seed):
    """Whatever the order of changes: a job's own wins, then the run-time default, then the environment's,
    adjusted per job only while no run-time default is set (``job_timeouts``)."""
    rng = random.Random(seed)
    fleet = DetectionSettings(hang=HangSettings(job_timeouts="timed=42"))
    store = SettingsStore(fleet)
    own: dict[tuple[type, str], object] = {}
    default: dict[type, object] = {}
    for _ in range(30):
        cls, job = rng.choice(CLASSES), rng.choice((None, *JOBS))
        value = None if job is not None and rng.random() < 0.3 else _variant(cls, rng)
        store.set(cls, job, value)
        if job is None:
            default[cls] = value
        elif value is None:
            own.pop((cls, job), None)
        else:
            own[(cls, job)] = value
        for c in CLASSES:
            for j in JOBS:
                env = getattr(fleet, section_of(c))
                if c is HangSettings and j == "timed":
                    env = dataclasses.replace(env, timeout_seconds=42.0)
                assert store.get(c, j) == own.get((c, j), default.get(c, env))
                assert store.has_own(c, j) == ((c, j) in own)
    with pytest.raises(ValueError, match="cannot be removed"):
        store.set(StragglerSettings, None, None)
