"""The files a user touches first: docker-compose.yml, the console script, --help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stepwatch.cli import build_parser

REPO = Path(__file__).resolve().parents[1]


def test_compose_runs_real_kafka_and_valid_stepwatch_commands():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    parser = build_parser()
    for name in ("worker", "simulator", "alerts"):
        service = services[name]
        assert service["build"] == "."
        assert service["environment"]["KAFKA_BOOTSTRAP"] == "kafka:9092"
        parser.parse_args(service["command"])  # exits on an unknown flag


@pytest.mark.parametrize("command", ["worker", "shard", "simulate", "replay", "alerts", "demo", "broker", "agent",
                                     "status", "config", "import", "scenarios"])
def test_every_subcommand_has_help(command):
    result = subprocess.run([sys.executable, "-m", "stepwatch.cli", command, "--help"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and "usage: stepwatch " + command in result.stdout
