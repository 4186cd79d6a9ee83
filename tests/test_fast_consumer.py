"""The aiokafka events consumer (``STEPWATCH_WORKER_CONSUMER=aiokafka``, the default) merges the step events of
consecutive messages into one column batch: that gives what the Faust agent's one message at a
time gives. (Real-broker runs of both modes: tests/test_worker_kafka.py, test_reliability_kafka.py.)"""

from __future__ import annotations

import orjson
import pytest

from stepwatch.config import Settings, WorkerSettings
from stepwatch.models.engine import DetectionEngine
from stepwatch.models.events import _step_columns, decode_message, encode_events
from stepwatch.producers import scenarios
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


@pytest.mark.parametrize("scenario", ["straggler-30pct-64", "multi-job-3", "straggler-2x-8"])
@pytest.mark.parametrize("per_message", [1, 16])
def test_merged_runs_give_the_alerts_of_one_message_at_a_time(scenario, per_message):
    messages = []
    for _, batch in scenarios.batches(scenarios.get(scenario)):
        for i in range(0, len(batch), per_message):
            messages.append(encode_events(batch[i:i + per_message]))
    one, merged = DetectionEngine(), DetectionEngine()
    got_one, got_merged = [], []
    group = 50  # messages per getmany
    for g in range(0, len(messages), group):
        arrival = 1_700_000_000.0 + g
        chunk = messages[g:g + group]
        for raw in chunk:
            events, _ = decode_message(raw)
            for event in events:
                got_one.extend(one.process(event, arrival=arrival))
        run: list = []
        items: list = []
        for raw in chunk + [None]:  # as install_events_consumer: runs of step messages, others alone
            found = _step_items(raw) if raw is not None else None
            if found is not None:
                run.append(raw)
                items.extend(found)
                continue
            if run:
                cols = _step_columns(items)
                if cols is not None:
                    got_merged.extend(merged.process_batch(cols, arrival=arrival))
                else:  # e.g. an envelope with other kinds in it: one message at a time
                    for one_raw in run:
                        got_merged.extend(merged.process_batch(decode_message(one_raw)[0], arrival=arrival))
                run, items = [], []
            if raw is not None:
                got_merged.extend(merged.process_batch(decode_message(raw)[0], arrival=arrival))
    key = lambda a: (a.id, a.status, a.type, a.ranks, a.severity)  # noqa: E731
    assert [key(a) for a in got_merged] == [key(a) for a in got_one]
    assert got_one  # each scenario has a problem to find
    assert merged.events_by_kind == one.events_by_kind
