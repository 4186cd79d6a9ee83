"""The aiokafka events consumer (``STEPWATCH_WORKER_CONSUMER=aiokafka``, the default) feeds whole ``getmany``
batches to the pipeline, which merges the step events of consecutive messages into one column batch:
that gives what the Faust agent's one message at a time gives (tests/models/test_pipeline.py calls the real
``Pipeline.feed`` both ways). Real-broker runs of both modes: tests/streams/test_worker_kafka.py,
test_reliability_kafka.py, test_pipeline_kafka.py."""

from __future__ import annotations

import orjson
import pytest

from stepwatch.config import Settings, WorkerSettings
from stepwatch.models.wire.events import encode_events
from stepwatch.streams.events_consumer import _step_items


def test_step_items_takes_step_events_and_envelopes_only():
    step = {"v": 1, "kind": "step", "job": "j", "rank": 0, "step": 1, "ts": 1.0, "step_time": 1.0}
    assert _step_items(orjson.dumps(step)) == (step,)
    assert _step_items(encode_events([step, step])) == [step, step]
    for raw in (b"{not json", b"[1]", b"\xff", orjson.dumps({"v": 1, "kind": "heartbeat", "job": "j"}),
                orjson.dumps({"v": 1, "kind": "batch", "events": []}), orjson.dumps({"v": 2, "kind": "batch",
                                                                                   "events": [step]}), None):
        assert _step_items(raw) is None


def test_worker_consumer_setting_is_checked():
    assert Settings.from_env({}).worker.consumer == "aiokafka"
    assert Settings.from_env({"STEPWATCH_WORKER_CONSUMER": "faust"}).worker.consumer == "faust"
    with pytest.raises(ValueError, match="worker.consumer"):
        WorkerSettings(consumer="kafka")
