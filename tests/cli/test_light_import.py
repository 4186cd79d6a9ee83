"""The training side is light (issue 25 item 6): importing the rank monitor or a training callback
loads no numpy, scipy, Faust or detection core of stepwatch's own.

Each import runs in a fresh interpreter and reports its ``sys.modules``; what is asserted is the
module set, not the time (the times are in BENCHMARKS.md). A callback's framework (Lightning,
transformers) may bring numpy itself, so for those the modules the framework alone loads are
subtracted first: what is left is what stepwatch added.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Never loaded by the training side: the numeric stack, the stream processor, the detection core.
HEAVY_ROOTS = ("numpy", "scipy", "faust", "aiokafka", "mode")
#: stepwatch's own modules the training side may load: the wire format and the client settings.
LIGHT_STEPWATCH = {"stepwatch", "stepwatch.client_settings", "stepwatch.models", "stepwatch.models.wire.deadletter",
                   "stepwatch.models.wire.events", "stepwatch.models.wire.nccl_events",
                   "stepwatch.models.wire.telemetry_events", "stepwatch.models.wire.wire"}
#: ... with the packages they live in (importing a module imports its package).
LIGHT_STEPWATCH |= {m.rpartition(".")[0] for m in LIGHT_STEPWATCH if "." in m}


def modules_after(*imports: str) -> set[str]:
    code = ("import importlib, json, sys\n"
            f"for name in {list(imports)!r}:\n"
            "    importlib.import_module(name)\n"
            "print(json.dumps(sorted(sys.modules)))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY_ROOTS)


def stepwatch_outside_producers(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] == "stepwatch" and not m.startswith("stepwatch.producers")}


def test_the_rank_monitor_imports_no_numpy_scipy_faust_nor_detection_core():
    modules = modules_after("stepwatch.producers.monitor")
    assert heavy(modules) == []
    assert stepwatch_outside_producers(modules) <= LIGHT_STEPWATCH, sorted(stepwatch_outside_producers(modules))
    assert "stepwatch.config" not in modules and "stepwatch.models.engine" not in modules


@pytest.mark.parametrize("callback, framework", [
    ("stepwatch.producers.torch_hooks", "torch.distributed"),
    ("stepwatch.producers.lightning", "lightning.pytorch"),
    ("stepwatch.producers.hf", "transformers"),
])
def test_a_training_callback_adds_nothing_heavy_to_its_framework(callback, framework):
    import importlib.util

    if importlib.util.find_spec(framework.split(".")[0]) is None:  # the train-test extra (CI installs it)
        pytest.skip(f"needs {framework.split('.')[0]} (pip install -e '.[train-test]')")
    framework_alone = modules_after(framework)
    modules = modules_after(framework, callback)
    added = modules - framework_alone
    assert heavy(added) == [], heavy(added)
    assert stepwatch_outside_producers(modules) <= LIGHT_STEPWATCH, sorted(stepwatch_outside_producers(modules))
    assert "stepwatch.models.engine" not in modules and "stepwatch.config" not in modules


def test_the_light_client_settings_parse_as_the_whole_tree_does():
    from stepwatch.client_settings import ClientSettings
    from stepwatch.config import Settings

    env = {"KAFKA_BOOTSTRAP": "b:9", "STEPWATCH_KAFKA_TOPIC_PREFIX": "t.", "STEPWATCH_SECURITY_PROTOCOL": "SSL",
           "STEPWATCH_SECURITY_SSL_CHECK_HOSTNAME": "no"}
    light, whole = ClientSettings.from_env(env), Settings.from_env(env)
    assert (light.kafka, light.security) == (whole.kafka, whole.security)
    assert light.kafka.bootstrap == "b:9" and light.security.ssl_check_hostname is False
    with pytest.raises(ValueError, match="STEPWATCH_KAFKA_PARTITIONS"):
        ClientSettings.from_env({"STEPWATCH_KAFKA_PARTITIONS": "four"})


def test_the_worker_and_replay_load_scipy_only_when_a_rule_needs_it():
    # scipy.stats was most of a worker's import CPU (0.8 s of 1.4 s) for one rank test that
    # runs only once a throughput drop is a candidate: every worker start and replay paid it.
    modules = modules_after("stepwatch.streams.worker", "stepwatch.recording")
    assert not [m for m in modules if m.split(".")[0] == "scipy"]
