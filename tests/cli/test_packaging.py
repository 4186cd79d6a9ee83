"""The files a user touches first: docker-compose.yml, the console script, --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stepwatch.cli import build_parser

REPO = Path(__file__).resolve().parents[2]


def test_compose_runs_real_kafka_and_valid_stepwatch_commands():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    parser = build_parser()
    for name in ("worker", "simulator", "alerts", "shard", "worker-large", "simulator-large"):
        service = services[name]
        assert service["build"] == "."
        assert service["environment"]["KAFKA_BOOTSTRAP"] == "kafka:9092"
        parser.parse_args(service["command"])  # exits on an unknown flag
    # The large-job profile: shard-keyed events on a topic of their own, never read by the plain worker.
    large = {name: services[name]["environment"] for name in ("shard", "worker-large", "simulator-large")}
    assert large["simulator-large"]["STEPWATCH_KAFKA_EVENTS_TOPIC"] == large["shard"]["STEPWATCH_KAFKA_EVENTS_TOPIC"]
    assert large["worker-large"]["STEPWATCH_KAFKA_EVENTS_TOPIC"] == "job-events"
    assert "--shard-ranks" in services["simulator-large"]["command"]
    assert services["worker"]["environment"].get("STEPWATCH_KAFKA_EVENTS_TOPIC", "events") == "events"


@pytest.mark.parametrize("command", ["worker", "shard", "simulate", "replay", "alerts", "demo", "broker", "agent",
                                     "status", "config", "import", "scenarios", "record", "publish"])
def test_every_subcommand_has_help(command):
    result = subprocess.run([sys.executable, "-m", "stepwatch.cli", command, "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and "usage: stepwatch " + command in result.stdout
