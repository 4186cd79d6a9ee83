"""Bounded state that never silences an alert (issue 27 findings 4 and 6).

The engine's job cap (``retention.max_jobs``) evicts the least recently active job *without* an open
alert: a flood of new job ids cannot resolve a hung job's alert as "state evicted". The jobs are an
LRU (an ``OrderedDict`` moved on every event), so a new job costs a bounded number of probes, not a
scan of every job (counted here, not timed).
"""

from __future__ import annotations

import dataclasses

from stepwatch.config import RetentionSettings, Settings
from stepwatch.models.engine import DetectionEngine
from stepwatch.models.events import parse_event

T0 = 1_764_000_000.0


def hung_engine(max_jobs: int) -> tuple[DetectionEngine, float]:
    settings = dataclasses.replace(Settings(), retention=RetentionSettings(max_jobs=max_jobs))
    engine = DetectionEngine(settings)
    for step in range(30):
        for rank in range(4):
            engine.process(parse_event({"v": 1, "kind": "step", "job": "hung", "rank": rank, "step": step,
                                        "ts": T0 + step, "step_time": 1.0}))
        engine.tick(T0 + step)
    now = T0 + 30 + settings.hang.timeout_seconds + 60
    fired = engine.tick(now)
    assert [(a.type, a.status) for a in fired if a.job == "hung"] == [("hang", "firing")]
    return engine, now


def test_new_job_ids_do_not_evict_a_hung_job():
    engine, now = hung_engine(max_jobs=100)
    out = []
    for i in range(10_001):  # finding 4: one message with 10,001 new job ids
        out.extend(engine.process(parse_event({"v": 1, "kind": "phase", "job": f"new-{i}", "ts": now,
                                               "phase": "train"})))
    assert "hung" in engine.jobs and len(engine.jobs) == 100
    assert [a for a in out if a.job == "hung"] == []  # not resolved "state evicted"
    assert [a.type for a in engine.open_alerts() if a.job == "hung"] == ["hang"]
    assert engine.jobs_refused == 0  # the others, without alerts, made room


def test_a_cap_full_of_alerting_jobs_refuses_the_new_one_and_counts_it():
    engine, now = hung_engine(max_jobs=1)
    assert engine.process(parse_event({"v": 1, "kind": "phase", "job": "new", "ts": now, "phase": "train"})) == []
    assert list(engine.jobs) == ["hung"] and engine.jobs_refused == 1


def test_a_new_job_costs_a_bounded_number_of_probes(monkeypatch):
    """Work per new job at the cap, counted as jobs looked at (open-alert probes, ``last_seen`` reads):
    a full scan (the old ``min`` over every job) would look at all 2000 for each of the 4000 new jobs."""
    from stepwatch.models.engine import JobState

    engine = DetectionEngine(dataclasses.replace(Settings(), retention=RetentionSettings(max_jobs=2000)))
    looked = []
    original = DetectionEngine._job_open_alerts
    monkeypatch.setattr(DetectionEngine, "_job_open_alerts",
                        staticmethod(lambda job: looked.append(1) or original(job)))
    slot = JobState.__dict__["last_seen"]
    monkeypatch.setattr(JobState, "last_seen", property(lambda job: looked.append(1) or slot.__get__(job, JobState),
                                                        lambda job, value: slot.__set__(job, value)))
    for i in range(6000):
        engine.process(parse_event({"v": 1, "kind": "phase", "job": f"j{i}", "ts": T0 + i, "phase": "train"}))
    assert len(engine.jobs) == 2000 and list(engine.jobs)[0] == "j4000"  # least recently active went first
    assert len(looked) <= 2 * 4000  # the probe and the evicted job's alerts: O(1) per new job


# -- per-producer caps (finding 5): counted, the over-cap part left out, never unbounded -------------

def test_a_heartbeat_listing_too_many_ranks_in_a_group_is_dead_lettered_with_the_reason():
    import orjson

    from stepwatch.models.events import MAX_PG_RANKS
    from stepwatch.models.pipeline import Message, Pipeline

    beat = {"v": 1, "kind": "heartbeat", "job": "j", "rank": 0, "ts": T0, "step": 1,
            "pgs": {"tp": {"started": 1, "completed": 1, "ranks": list(range(MAX_PG_RANKS + 1))}}}
    out = Pipeline().feed([Message(orjson.dumps(beat), b"j", "ev", 0, 7)], arrival=T0)
    assert [d.cause for d in out.deadletters] == ["decode"]
    assert f"ranks lists more than {MAX_PG_RANKS} ranks" in out.deadletters[0].rejected.reason


def test_process_groups_and_their_ranks_per_job_are_capped_and_counted(monkeypatch):
    from stepwatch.models import hang

    monkeypatch.setattr(hang, "MAX_PGS", 50)
    monkeypatch.setattr(hang, "MAX_PG_RANK_ENTRIES", 100)
    engine = DetectionEngine()
    for i in range(20):  # 20 heartbeats of 10 new groups each, 8 ranks listed per group
        pgs = {f"pg{i}-{g}": {"started": 1, "completed": 1, "ranks": list(range(8))} for g in range(10)}
        engine.process(parse_event({"v": 1, "kind": "heartbeat", "job": "j", "rank": 0, "ts": T0 + i, "step": 1,
                                    "pgs": pgs}))
    detector = engine.jobs["j"].hang
    assert len(detector._pg_seq) == 50
    assert sum(len(r) for r in detector._pg_ranks.values() if r) <= 100
    assert engine.capped()["process_groups_per_job"] == 150
    assert engine.capped()["pg_ranks_per_job"] == 50 - 100 // 8


def test_gpus_and_ports_per_node_and_op_names_per_job_are_capped_and_counted():
    from stepwatch.models import comm, telemetry_tracker as tt

    engine = DetectionEngine()
    for g in range(tt.MAX_GPUS_PER_NODE + 100):  # finding 5: 200k GPU indexes on one node
        engine.process(parse_event({"v": 1, "kind": "gpu", "node": "n1", "ts": T0, "gpu": g, "temp_c": 60.0}))
    for p in range(tt.MAX_PORTS_PER_NODE + 10):
        engine.process(parse_event({"v": 1, "kind": "link", "node": "n1", "ts": T0, "device": "mlx5_0", "port": p + 1,
                                    "state": "ACTIVE", "rate": 400.0, "counters": {}}))
    node = engine.telemetry.tracker._nodes["n1"]
    assert len(node.gpus) == tt.MAX_GPUS_PER_NODE and len(node.ports) == tt.MAX_PORTS_PER_NODE
    for i in range(comm.MAX_OP_KEYS + 30):
        engine.process(parse_event({"v": 1, "kind": "collective", "job": "j", "rank": 0, "seq": 1, "op": f"op{i}",
                                    "ts": T0, "duration": 0.01}))
    capped = engine.capped()
    assert (capped["gpus_per_node"], capped["ports_per_node"], capped["op_names_per_job"]) == (100, 10, 30)
    assert len(engine.jobs["j"].comm._keys) == comm.MAX_OP_KEYS
    assert len(engine.jobs["j"].arrival._ops) <= 1024


def test_metrics_count_what_was_capped():
    from stepwatch.streams.metrics import WorkerMetrics

    engine = DetectionEngine()
    from stepwatch.models import telemetry_tracker as tt

    for g in range(tt.MAX_GPUS_PER_NODE + 3):
        engine.process(parse_event({"v": 1, "kind": "gpu", "node": "n1", "ts": T0, "gpu": g, "temp_c": 60.0}))
    text = WorkerMetrics(engine).render().decode()
    assert 'stepwatch_state_capped_total{what="gpus_per_node"} 3.0' in text
    assert "stepwatch_engine_jobs_refused_total 0.0" in text


def test_ranks_per_job_are_capped_and_counted_whatever_the_path():
    """finding 5: 40 heartbeats listing 2M ranks; here new ranks beyond ``retention.max_ranks_per_job``."""
    from stepwatch.models.events import encode_events
    from stepwatch.models.pipeline import Message, Pipeline

    settings = dataclasses.replace(Settings(), retention=RetentionSettings(max_ranks_per_job=100))
    pipeline = Pipeline(settings=settings)
    engine = pipeline.engine
    steps = [{"v": 1, "kind": "step", "job": "j", "rank": r, "step": 1, "ts": T0, "step_time": 1.0} for r in range(150)]
    pipeline.feed([Message(encode_events(steps), b"j", "ev", 0, 0)], arrival=T0)  # the column path
    assert engine.jobs["j"].hang.rank_count == 100 and engine.jobs["j"].ranks == set(range(100))
    beat = {"v": 1, "kind": "heartbeat", "job": "j", "rank": 500, "ts": T0 + 1, "step": 1}
    pipeline.feed([Message(encode_events([beat]), b"j", "ev", 0, 1)], arrival=T0 + 1)  # one by one
    lone = {"v": 1, "kind": "step", "job": "j", "rank": 501, "step": 2, "ts": T0 + 1, "step_time": 1.0}
    pipeline.feed([Message(encode_events([lone]), b"j", "ev", 0, 2)], arrival=T0 + 1)
    assert engine.jobs["j"].hang.rank_count == 100
    assert engine.capped()["ranks_per_job"] == 50 + 1 + 1
    assert engine.events_by_kind["step"] == 100  # the left-out steps were neither judged nor counted
    known = [{**s, "step": 2, "ts": T0 + 2} for s in steps[:100]]
    pipeline.feed([Message(encode_events(known), b"j", "ev", 0, 3)], arrival=T0 + 2)
    assert engine.jobs["j"].latest_step == 2 and engine.capped()["ranks_per_job"] == 52
