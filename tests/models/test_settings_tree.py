"""The settings tree: sections live next to what they configure, the core stays free of ``stepwatch``."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from models.hang.detector import HangDetector, HangSettings
from models.settings import DetectionSettings
from models.steps.straggler import StragglerDetector, StragglerSettings
from models.tunable import runtime_fields, startup_fields
from stepwatch import runtime_config
from stepwatch.config import Settings

MODELS = Path(__file__).resolve().parents[2] / "models"


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):  # function-level imports too
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_core_imports_nothing_from_stepwatch():
    offenders = {str(p.relative_to(MODELS)): sorted(m for m in _imported_modules(p)
                                                    if m.split(".")[0] in ("stepwatch", "streams", "producers"))
                 for p in sorted(MODELS.rglob("*.py"))}
    assert {name: mods for name, mods in offenders.items() if mods} == {}


def test_every_detection_section_is_defined_in_the_core_and_shared_by_the_whole_tree():
    core = {f.name for f in dataclasses.fields(DetectionSettings)}
    assert core == {"straggler", "assembly", "hang", "job_health", "retention", "telemetry", "host", "oncall",
                    "worker"}
    settings = Settings()
    for name in core - {"worker"}:
        section = getattr(settings, name)
        assert type(section).__module__.startswith("stepwatch.models."), name
    # The worker section of the process tree is the pipeline's, extended.
    from stepwatch.models.pipeline import PipelineSettings
    assert isinstance(settings.worker, PipelineSettings)
    env = Settings.from_env({"STEPWATCH_WORKER_TICK_INTERVAL": "0.25", "STEPWATCH_STRAGGLER_WINDOW": "7"})
    assert (env.worker.tick_interval, env.straggler.window) == (0.25, 7)


def test_start_up_only_fields_are_the_ones_marked_so_on_the_dataclass():
    assert startup_fields(HangSettings) == ("job_timeouts", "step_history")
    assert startup_fields(StragglerSettings) == ()
    for field in ("job_timeouts", "step_history"):
        with pytest.raises(ValueError, match="only be set at start-up"):
            runtime_config.parse_assignments([f"hang.{field}=3"])
    assert runtime_config.parse_assignments(["hang.timeout_seconds=42"]) == {"hang": {"timeout_seconds": 42.0}}


def test_detectors_take_their_settings_and_defaults_from_the_dataclass():
    s = StragglerSettings(ratio_threshold=1.3, window=7, min_flagged=4, long_window=50)
    detector = StragglerDetector.from_settings(s, job="j", group="g")
    assert (detector.ratio_threshold, detector.window, detector.min_flagged) == (1.3, 7, 4)
    # The long-horizon fields configure the other rule, not this one.
    assert "long_window" not in StragglerDetector.TUNABLE and "holdoff_steps" in StragglerDetector.TUNABLE
    bare = StragglerDetector(job="j")
    assert (bare.ratio_threshold, bare.z_threshold, bare.window) == (1.10, 3.5, 5)

    h = HangSettings(timeout_seconds=90.0, step_history=16, stacks=False)
    hang = HangDetector.from_settings(h, job="j")
    assert (hang.timeout_seconds, hang.step_history, hang.stacks) == (90.0, 16, False)
    hang.reconfigure(dataclasses.replace(h, timeout_seconds=30.0, step_history=999))
    assert (hang.timeout_seconds, hang.step_history) == (30.0, 16)  # step_history is start-up only
    assert "step_history" not in runtime_fields(HangSettings)


@pytest.mark.parametrize("module", ["stepwatch.models.settings", "stepwatch.models.settings_store", "stepwatch.config"])
def test_the_settings_tree_imports_no_detector_engine_or_numeric_stack(module):
    """Each section's class lives in a light settings module (issue 40 item 4): reading settings loads no
    engine, pipeline or detector, so no import cycle runs through the tree."""
    import json
    import subprocess
    import sys

    code = f"import importlib, json, sys; importlib.import_module({module!r}); print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    ours = {m.removeprefix("stepwatch.") for m in loaded if m.split(".")[0] == "stepwatch"}
    light = {"", "stepwatch", "client_settings", "config", "models", "models.tunable", "models.settings",
             "models.settings_store"}
    assert sorted(m for m in ours if m not in light and not m.endswith(".settings")
                  and m not in {"models.steps", "models.hang", "models.jobhealth", "models.telemetry",
                                "models.oncall"}) == []
    assert sorted(m for m in loaded if m.split(".")[0] in ("numpy", "scipy", "faust", "aiokafka", "orjson")) == []
