"""Bounded state that never silences an alert (issue 27 findings 4 and 6).

The engine's job cap (``retention.max_jobs``) evicts the least recently active job *without* an open
alert: a flood of new job ids cannot resolve a hung job's alert as "state evicted". The jobs are an
LRU (an ``OrderedDict`` moved on every event), so a new job costs a bounded number of probes, not a
scan of every job (counted here, not timed).
"""

from __future__ import annotations

import dataclasses

import pytest

from stepwatch.config import RetentionSettings, Settings
from stepwatch.models.detection import DetectionEngine
from stepwatch.models.wire.events import parse_event

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
    # Its ranks are alive (a heartbeat since the hang fired): a real hang, never pushed out.
    engine.process(parse_event({"v": 1, "kind": "heartbeat", "job": "hung", "rank": 0, "ts": now + 1, "step": 30}))
    assert engine.process(parse_event({"v": 1, "kind": "phase", "job": "new", "ts": now, "phase": "train"})) == []
    assert list(engine.jobs) == ["hung"] and engine.jobs_refused == 1


def test_silent_hung_junk_jobs_do_not_lock_out_a_real_one():
    """Issue 44 finding 2: with the cap at 300 and a 60 s hang timeout, 300 one-step jobs that go silent all held
    open hangs and refused a real job (no alert). Jobs whose only open alert is a hang no rank has spoken since
    make room: each counted, its hang resolved ``forgotten``; the real job's straggler fires."""
    from engine_driver import replay
    from fleet import Job, job_events

    settings = dataclasses.replace(Settings(), retention=RetentionSettings(max_jobs=300),
                                   hang=dataclasses.replace(Settings().hang, timeout_seconds=60.0))
    engine = DetectionEngine(settings)
    junk = [parse_event({"v": 1, "kind": "step", "job": f"junk-{i}", "rank": r, "step": 1, "ts": T0 + i * 0.01,
                         "step_time": 1.0}) for i in range(300) for r in range(2)]
    alerts = list(replay(junk, engine=engine)) + engine.tick(T0 + 100)
    assert len({a.job for a in alerts if a.type == "hang" and a.status == "firing"}) == 300
    real = Job("real", ["r1", "r2", "r3", "r4"], slow_node="r3", slow_factor=1.5, start=T0 + 120)
    alerts = list(replay((parse_event(e) for e in job_events(real)), engine=engine))
    assert [a.ranks for a in alerts if a.job == "real" and a.type == "straggler" and a.status == "firing"] == [(8,)]
    assert engine.jobs_refused == 0 and engine.jobs_evicted["dead_hang"] >= 1
    forgotten = [a for a in alerts if a.job.startswith("junk-") and a.status == "resolved"]
    assert forgotten and {a.evidence["resolution"] for a in forgotten} == {"forgotten"}
    assert len(forgotten) == engine.jobs_evicted["dead_hang"]


def test_a_new_job_costs_a_bounded_number_of_probes(monkeypatch):
    """Work per new job at the cap, counted as jobs looked at (open-alert probes, ``last_seen`` reads):
    a full scan (the old ``min`` over every job) would look at all 2000 for each of the 4000 new jobs."""
    from stepwatch.models.engine import JobState

    engine = DetectionEngine(dataclasses.replace(Settings(), retention=RetentionSettings(max_jobs=2000)))
    looked = []
    original = JobState.open_alerts
    monkeypatch.setattr(JobState, "open_alerts", lambda job: looked.append(1) or original(job))
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

    from stepwatch.models.wire.events import MAX_PG_RANKS
    from stepwatch.models.pipeline import Message, Pipeline

    beat = {"v": 1, "kind": "heartbeat", "job": "j", "rank": 0, "ts": T0, "step": 1,
            "pgs": {"tp": {"started": 1, "completed": 1, "ranks": list(range(MAX_PG_RANKS + 1))}}}
    out = Pipeline().feed([Message(orjson.dumps(beat), b"j", "ev", 0, 7)], arrival=T0)
    assert [d.cause for d in out.deadletters] == ["decode"]
    assert f"ranks lists more than {MAX_PG_RANKS} ranks" in out.deadletters[0].rejected.reason


def test_process_groups_and_their_ranks_per_job_are_capped_and_counted(monkeypatch):
    from stepwatch.models.hang import progress as hang

    monkeypatch.setattr(hang, "MAX_PGS", 50)
    monkeypatch.setattr(hang, "MAX_PG_RANK_ENTRIES", 100)
    engine = DetectionEngine()
    for i in range(20):  # 20 heartbeats of 10 new groups each, 8 ranks listed per group
        pgs = {f"pg{i}-{g}": {"started": 1, "completed": 1, "ranks": list(range(8))} for g in range(10)}
        engine.process(parse_event({"v": 1, "kind": "heartbeat", "job": "j", "rank": 0, "ts": T0 + i, "step": 1,
                                    "pgs": pgs}))
    detector = engine.jobs["j"].hang
    assert len(detector.progress.pg_seq) == 50
    assert sum(len(r) for r in detector.progress.pg_ranks.values() if r) <= 100
    assert engine.capped()["process_groups_per_job"] == 150
    assert engine.capped()["pg_ranks_per_job"] == 50 - 100 // 8


def test_gpus_and_ports_per_node_and_op_names_per_job_are_capped_and_counted():
    from stepwatch.models.jobhealth import comm
    from stepwatch.models.telemetry import telemetry_tracker as tt

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
    from stepwatch.models.telemetry import telemetry_tracker as tt

    for g in range(tt.MAX_GPUS_PER_NODE + 3):
        engine.process(parse_event({"v": 1, "kind": "gpu", "node": "n1", "ts": T0, "gpu": g, "temp_c": 60.0}))
    text = WorkerMetrics(engine).render().decode()
    assert 'stepwatch_state_capped_total{what="gpus_per_node"} 3.0' in text
    assert "stepwatch_engine_jobs_refused_total 0.0" in text


def test_ranks_per_job_are_capped_and_counted_whatever_the_path():
    """finding 5: 40 heartbeats listing 2M ranks; here new ranks beyond ``retention.max_ranks_per_job``."""
    from stepwatch.models.wire.events import encode_events
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


# -- over-cap input dead-lettered, not only counted (issue 27 item 4) ------------------------------


def _dead(out) -> list[tuple[str, list]]:
    """(cause, [(index, reason)]) of each dead letter, from the record the dead-letter topic gets."""
    import orjson

    records = [orjson.loads(d.record()) for d in out.deadletters]
    return [(r["cause"], [(x["index"], x["reason"]) for x in r["rejected"]]) for r in records]


def test_one_message_opens_a_bounded_number_of_new_jobs_the_rest_dead_lettered_by_index():
    """finding 4/6: one envelope naming 300 new jobs opens 256 (``max_new_jobs_per_message``); the other 44
    events are in the message's one dead letter by index, counted in /metrics; a known job is never refused."""
    from stepwatch.models.wire.events import encode_events
    from stepwatch.models.pipeline import Message, Pipeline
    from stepwatch.streams.metrics import WorkerMetrics

    pipeline = Pipeline()
    limit = pipeline.engine.settings.worker.max_new_jobs_per_message
    pipeline.feed([Message(encode_events([{"v": 1, "kind": "step", "job": "known", "rank": 0, "step": 0,
                                           "ts": T0, "step_time": 1.0}]), b"k", "ev", 0, 0)], arrival=T0)
    for kind, offset in (("step", 1), ("heartbeat", 2)):  # the column road and the one-by-one road
        events = [{"v": 1, "kind": kind, "job": f"{kind}-{i}", "rank": 0, "step": 1, "ts": T0, "step_time": 1.0}
                  for i in range(limit + 44)]
        events.insert(100, {"v": 1, "kind": kind, "job": "known", "rank": 1, "step": 1, "ts": T0, "step_time": 1.0})
        if kind == "heartbeat":
            for e in events:
                del e["step_time"]
        out = pipeline.feed([Message(encode_events(events), b"x", "ev", 0, offset)], arrival=T0)
        (cause, rejected), = _dead(out)
        assert cause == "capped" and [i for i, _ in rejected] == list(range(limit + 1, limit + 45))
        assert "STEPWATCH_WORKER_MAX_NEW_JOBS_PER_MESSAGE" in rejected[0][1]
        assert sum(j.startswith(kind) for j in pipeline.engine.jobs) == limit
    assert pipeline.engine.capped()["new_jobs_per_message"] == 88
    text = WorkerMetrics(pipeline.engine).render().decode()
    assert 'stepwatch_state_capped_total{what="new_jobs_per_message"} 88.0' in text


def test_steps_of_ranks_over_the_cap_are_dead_lettered_by_index_in_their_own_messages():
    """The column road merges consecutive step messages: each over-cap event goes to its own message's
    dead letter, at its index in that envelope."""
    from stepwatch.models.wire.events import encode_events
    from stepwatch.models.pipeline import Message, Pipeline

    pipeline = Pipeline(settings=dataclasses.replace(Settings(), retention=RetentionSettings(max_ranks_per_job=6)))
    step = lambda r, s: {"v": 1, "kind": "step", "job": "j", "rank": r, "step": s, "ts": T0 + s, "step_time": 1.0}
    first = Message(encode_events([step(r, 1) for r in range(4)]), b"j", "ev", 0, 10)
    second = Message(encode_events([step(r, 1) for r in range(4, 9)]), b"j", "ev", 0, 11)
    lone = Message(orjson_dumps(step(9, 2)), b"j", "ev", 0, 12)
    out = pipeline.feed([first, second, lone], arrival=T0 + 2)
    assert [d.message.offset for d in out.deadletters] == [11, 12]
    assert _dead(out)[0][0] == "capped" and [i for i, _ in _dead(out)[0][1]] == [2, 3, 4]  # ranks 6, 7, 8
    assert "ranks_per_job" in _dead(out)[0][1][0][1]
    assert [i for i, _ in _dead(out)[1][1]] == [None]  # a lone event: the whole message
    assert pipeline.engine.capped()["ranks_per_job"] == 4 and pipeline.engine.jobs["j"].hang.rank_count == 6


def orjson_dumps(obj) -> bytes:
    import orjson

    return orjson.dumps(obj)


def test_accumulated_state_caps_dead_letter_the_event_that_hit_them(monkeypatch):
    """Process groups per job, GPUs and ports per node, op names per job, ranks per job on the one-by-one
    road: the event a cap left (part of) out is in its message's dead letter with what, as well as counted."""
    from stepwatch.models.jobhealth import comm
    from stepwatch.models.hang import progress as hang
    from stepwatch.models.telemetry import telemetry_tracker as tt
    from stepwatch.models.wire.events import encode_events
    from stepwatch.models.pipeline import TELEMETRY_ROAD, Message, Pipeline

    monkeypatch.setattr(hang, "MAX_PGS", 30)
    pipeline = Pipeline(settings=dataclasses.replace(Settings(), retention=RetentionSettings(max_ranks_per_job=2)))
    beats = [{"v": 1, "kind": "heartbeat", "job": "j", "rank": 0, "ts": T0 + i, "step": 1,
              "pgs": {f"pg{i}-{g}": {"started": 1, "completed": 1} for g in range(10)}} for i in range(4)]
    out = pipeline.feed([Message(encode_events(beats), b"j", "ev", 0, 1)], arrival=T0 + 5)
    assert [(c, [i for i, _ in r]) for c, r in _dead(out)] == [("capped", [3])]
    assert "process_groups_per_job" in _dead(out)[0][1][0][1]
    gpus = [{"v": 1, "kind": "gpu", "node": "n1", "ts": T0, "gpu": g, "temp_c": 60.0}
            for g in range(tt.MAX_GPUS_PER_NODE + 2)]
    ports = [{"v": 1, "kind": "link", "node": "n1", "ts": T0, "device": "mlx5_0", "port": p + 1, "state": "ACTIVE",
              "rate": 400.0, "counters": {}} for p in range(tt.MAX_PORTS_PER_NODE + 1)]
    out = pipeline.feed([Message(encode_events(gpus), b"n1", "tel", 0, 2), Message(encode_events(ports), b"n1", "tel", 0, 3)],
                        arrival=T0 + 5, road=TELEMETRY_ROAD)
    assert [(c, [i for i, _ in r]) for c, r in _dead(out)] == [
        ("capped", [tt.MAX_GPUS_PER_NODE, tt.MAX_GPUS_PER_NODE + 1]), ("capped", [tt.MAX_PORTS_PER_NODE])]
    ops = [{"v": 1, "kind": "collective", "job": "j", "rank": 0, "seq": 1, "op": f"op{i}", "ts": T0,
            "duration": 0.01} for i in range(comm.MAX_OP_KEYS + 3)]
    out = pipeline.feed([Message(encode_events(ops), b"j", "ev", 0, 4)], arrival=T0 + 5)
    assert [(c, [i for i, _ in r]) for c, r in _dead(out)] == [("capped", list(range(comm.MAX_OP_KEYS, comm.MAX_OP_KEYS + 3)))]
    late = [{"v": 1, "kind": "heartbeat", "job": "j", "rank": r, "ts": T0 + 6, "step": 1} for r in range(1, 4)]
    out = pipeline.feed([Message(encode_events(late), b"j", "ev", 0, 5)], arrival=T0 + 6)
    assert [(c, [i for i, _ in r]) for c, r in _dead(out)] == [("capped", [1, 2])]  # ranks 2 and 3
    assert "ranks_per_job" in _dead(out)[0][1][0][1]
    capped = pipeline.engine.capped()
    assert (capped["process_groups_per_job"], capped["gpus_per_node"], capped["ports_per_node"],
            capped["op_names_per_job"], capped["ranks_per_job"]) == (10, 2, 1, 3, 2)


def test_an_open_step_keeps_a_bounded_copy_of_a_duplicating_senders_reports_and_closes_with_the_latest():
    """An open step keeps its reports as columns (models/steps/assembly.py); a sender repeating the same ranks'
    step does not grow them without bound, one event at a time or in batches, and each rank's latest report wins."""
    from stepwatch.models.steps.assembly import StepAssembler

    assembler = StepAssembler(job="j", group="")
    n = 3 * 400  # ranks 0-2 of a 4-rank step, 400 times over: the step stays open
    ranks, compute = [r % 3 for r in range(n)], [float(k) for k in range(n)]
    columns = ([T0] * n, [1.0] * n, compute, [0.1] * n, [0.0] * n, [0.0] * n, ["n0"] * n)
    assert assembler.add_columns(ranks, [7] * n, [4] * n, ["train"] * n, columns) == []  # in batches
    for k in range(n):  # and one event at a time
        assert assembler.add_columns((k % 3,), (7,), (4,), ("train",), tuple(c[k:k + 1] for c in columns)) == []
    assert len(assembler._open[7].cols[0]) <= 2 * 3 + 64
    [(_, [step])] = assembler.add_columns([3], [7], [4], ["train"], tuple(c[:1] for c in columns))
    assert step.ranks.tolist() == [0, 1, 2, 3]
    assert step.compute_time.tolist() == [n - 3, n - 2, n - 1, 0.0]  # the latest of each rank


# -- totals: per-key caps must not multiply across nodes and jobs (issue 44) ---------------------------------

def test_gpus_and_ports_across_nodes_are_capped_in_total(monkeypatch):
    """200 forged nodes x 256 ports took 1.84 GB: each node under its own cap, the sum unbounded."""
    from stepwatch.models.telemetry import telemetry_tracker as tt

    monkeypatch.setattr(tt, "MAX_PORTS_TOTAL", 100)
    monkeypatch.setattr(tt, "MAX_GPUS_TOTAL", 60)
    engine = DetectionEngine()
    for n in range(20):
        for p in range(10):
            engine.process(parse_event({"v": 1, "kind": "link", "node": f"n{n}", "ts": T0, "device": "mlx5_0",
                                        "port": p + 1, "state": "ACTIVE", "rate": 400.0, "counters": {}}))
        for g in range(8):
            engine.process(parse_event({"v": 1, "kind": "gpu", "node": f"n{n}", "ts": T0, "gpu": g, "temp_c": 60.0}))
    nodes = engine.telemetry.tracker._nodes.values()
    assert sum(len(node.ports) for node in nodes) == 100 and sum(len(node.gpus) for node in nodes) == 60
    capped = engine.capped()
    assert (capped["ports_total"], capped["gpus_total"]) == (100, 100)


@pytest.mark.parametrize("batch", [False, True], ids=["one-by-one", "batch"])
def test_ranks_across_jobs_are_capped_in_total_and_an_evicted_job_frees_its_share(batch):
    """2 jobs x 100k ranks took 877 MB: each job under its own cap, the sum unbounded."""
    from stepwatch.models.pipeline import Message, Pipeline
    from stepwatch.models.wire.events import encode_events

    settings = dataclasses.replace(Settings(), retention=RetentionSettings(max_ranks_per_job=80, max_ranks_total=100,
                                                                          max_jobs=2))

    def steps(job: str, ts: float) -> list[dict]:
        return [{"v": 1, "kind": "step", "job": job, "rank": r, "step": 1, "ts": ts, "step_time": 1.0}
                for r in range(80)]

    pipeline = Pipeline(settings=settings)
    engine = pipeline.engine
    for i, job in enumerate(("a", "b", "c")):
        if batch:
            pipeline.feed([Message(encode_events(steps(job, T0 + i)), job.encode(), "ev", 0, i)], arrival=T0 + i)
        else:
            for e in steps(job, T0 + i):
                engine.process(parse_event(e))
        tracked = sum(j.hang.rank_count for j in engine.jobs.values())
        assert tracked <= 100, (job, tracked)
    # a (80) and b (20 of 80) filled the total; c evicted a (no open alert) and took its 80
    assert {name: j.hang.rank_count for name, j in engine.jobs.items()} == {"b": 20, "c": 80}
    assert engine.capped()["ranks_per_job"] >= 60


def test_process_groups_across_jobs_are_capped_in_total_and_an_evicted_job_frees_its_share():
    """The per-job group cap must not multiply across (forged) jobs: a total across jobs, counted apart."""
    settings = dataclasses.replace(Settings(), retention=RetentionSettings(max_process_groups_total=100, max_jobs=2))
    engine = DetectionEngine(settings)

    def heartbeat(job: str, i: int, ts: float) -> None:
        pgs = {f"{job}-pg{i}-{g}": {"started": 1, "completed": 1} for g in range(40)}
        engine.process(parse_event({"v": 1, "kind": "heartbeat", "job": job, "rank": 0, "ts": ts, "step": 1,
                                    "pgs": pgs}))

    for i, job in enumerate(("a", "b", "c")):
        for k in range(2):  # 80 groups asked for by each job, in two heartbeats
            heartbeat(job, k, T0 + 10 * i + k)
        tracked = sum(j.hang.pg_count for j in engine.jobs.values())
        assert tracked <= 100, (job, tracked)
    # a (80) and b (20 of 80) filled the total; c evicted a (no open alert) and took its 80
    assert {name: j.hang.pg_count for name, j in engine.jobs.items()} == {"b": 20, "c": 80}
    capped = engine.capped()
    assert capped["process_groups_total"] >= 60 and capped["process_groups_per_job"] == 0


@pytest.mark.parametrize("max_jobs", [20, 100])
def test_a_job_stalled_before_its_hang_fires_is_not_evicted_by_one_step_jobs(max_jobs):
    """Issue 44 (still open from the audit): a real job stalled 10 s, its hang not yet due, then cap + 1 one-step
    jobs. The stalled job must not make room (its hang would never fire): the one-step jobs make room for each
    other, and the real job's hang fires once due."""
    settings = dataclasses.replace(Settings(), retention=RetentionSettings(max_jobs=max_jobs))
    engine = DetectionEngine(settings)
    for step in range(30):
        for rank in range(4):
            engine.process(parse_event({"v": 1, "kind": "step", "job": "real", "rank": rank, "step": step,
                                        "ts": T0 + step, "step_time": 1.0}))
        engine.tick(T0 + step)
    stalled = T0 + 29 + 10
    out = engine.tick(stalled)
    for i in range(max_jobs + 1):
        out.extend(engine.process(parse_event({"v": 1, "kind": "step", "job": f"one-{i}", "rank": 0, "step": 1,
                                               "ts": stalled + i * 0.001, "step_time": 1.0})))
    assert "real" in engine.jobs and len(engine.jobs) == max_jobs
    assert engine.jobs_refused == 0  # one-step jobs made room for each other
    assert [a for a in out if a.job == "real"] == []
    out.extend(engine.tick(T0 + 29 + settings.hang.timeout_seconds + 60))
    assert [(a.type, a.status) for a in out if a.job == "real"] == [("hang", "firing")]
