"""One comparison per run of step events (models/steps/layout.py): a run that repeats the job's previous ranks,
nodes and GPUs gets the previous ``RunLayout`` object, any difference a new one, and the modules that keep
something per layout see a changed run as changed."""

from __future__ import annotations

from stepwatch.models.detection import DetectionEngine
from stepwatch.models.steps.layout import RunLayout, layout_of
from stepwatch.models.wire.events import StepEvent
from stepwatch.models.wire.step_columns import StepColumns


def test_layout_of_keeps_the_previous_object_only_for_equal_columns():
    first = layout_of(None, [0, 1], ["a", "b"], [0, 1])
    assert isinstance(first, RunLayout)
    assert layout_of(first, [0, 1], ["a", "b"], [0, 1]) is first
    for ranks, nodes, gpus in (([1, 0], ["a", "b"], [0, 1]), ([0, 1], ["a", "c"], [0, 1]),
                               ([0, 1], ["a", "b"], [0, None]), ([0], ["a"], [0])):
        other = layout_of(first, ranks, nodes, gpus)
        assert other is not first and (other.ranks, other.nodes, other.gpus) == (ranks, nodes, gpus)


def _step(step: int, nodes: list[str], ranks=range(4)) -> StepColumns:
    return StepColumns.of([StepEvent(job="j", rank=r, step=step, ts=100.0 + step + 0.01 * r, step_time=1.0,
                                     node=nodes[r], gpu=r % 2, compute_time=0.8) for r in ranks])


def test_engine_shares_one_layout_per_batch_and_job():
    engine = DetectionEngine()
    cols = _step(1, ["n0", "n0", "n1", "n1"])
    layouts = engine.layouts(cols)
    assert engine.layouts(cols) is layouts  # worked out once per batch
    engine.process_batch(cols)
    job = engine.jobs["j"]
    assert job.layout is layouts[0, 4]
    engine.process_batch(_step(2, ["n0", "n0", "n1", "n1"]))
    assert job.layout is layouts[0, 4]  # the same ranks, nodes and GPUs: the same object
    engine.process_batch(_step(3, ["n0", "n0", "n1", "n2"]))  # rank 3 moved
    assert job.layout is not layouts[0, 4] and job.layout.nodes[3] == "n2"
    # what the modules kept for the old layout is not taken for the new one: rank 3's node is n2 everywhere
    assert engine.telemetry.correlator.placement("j", 3) == ("n2", 1)
    assert engine.jobs["j"].hang.progress.nodes[engine.jobs["j"].hang.progress.slot_of_rank[3]] == "n2"
