"""The throughput benchmark (bench/throughput.py and its parts) at a tiny size: each in-process part and the
memory part's child process measure something, the report renders from it, and the child programs in
bench/children/ import without running (they start only as ``python -m bench.children.NAME``)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))  # the benchmark's parts import one another as bench.*


def test_core_and_memory_parts_measure_and_the_report_renders():
    from bench.core_bench import core, profile
    from bench.memory_bench import memory
    from bench.throughput import markdown

    c = core(ranks=16, steps=4, rounds=1)
    assert c["events"] == 64
    for key in ("decode_single", "decode_batched", "full_single", "full_batched", "decode_columns", "full_columns"):
        assert c[key] > 0, key
    prof = profile(ranks=16, steps=4, top=3)
    assert len(prof) == 3 and all(0 < share <= 1 for _, share in prof)
    (mem,) = memory(sizes=(16,), steps=2)  # a fresh process: python -m bench.children.engine_memory
    assert mem["ranks"] == 16 and mem["events"] == 32
    assert mem["traced"] > 0 and mem["rss_total"] > 0 and mem["cpu_per_event_us"] > 0

    text = markdown(c, None, [mem], ".venv/bin/python bench/throughput.py --skip-kafka", prof)
    assert text.startswith("## Throughput and scale (`bench/throughput.py`)")
    assert "### (a) Core: decode + detection in one process (16-rank job, 64 step events" in text
    assert "### (c) Memory and CPU per tracked rank" in text and "\n| 16 | " in text
    assert "### Hot spots" in text
    assert "### Against the targets" not in text  # the verdicts need the broker parts


@pytest.mark.parametrize("name", ["engine_memory", "worker_rate", "worker_progress", "trivial_faust_agent"])
def test_child_programs_are_modules_that_run_only_as_main(name):
    mod = importlib.import_module(f"bench.children.{name}")
    assert callable(mod.main)


def test_worker_trees_says_what_it_compares(capsys):
    """bench/worker_trees.py (the side-by-side table in BENCHMARKS.md): its --help, without a broker."""
    from bench.worker_trees import main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "revs" in out and "--rounds" in out and "side by side" in out
