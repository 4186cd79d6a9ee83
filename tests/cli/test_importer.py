"""`stepwatch import`: column mapping, op-level aggregation, presets, and the real shared traces."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import orjson
import pytest

from conftest import in_ci
from stepwatch import importer
from engine_driver import replay
from stepwatch.models.wire.events import decode_message, parse_event

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"


def _write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_csv_rows_with_column_mapping_and_synthesized_clock(tmp_path):
    rows = [[r, s, 100 + r, 80 + r, "st" + str(r % 2)] for s in range(3) for r in range(4)]
    path = _write_csv(tmp_path / "myjob.csv", ["worker", "iter", "ms", "compute_ms", "stage"], rows)
    mapping = importer.mapping_from_args(None, {"rank": "worker", "step": "iter", "step_time": "ms",
                                                "compute_time": "compute_ms", "group": "stage"}, time_scale=0.001)
    events = importer.convert([path], mapping)
    assert importer.validate(events) == 12
    first = events[0]
    assert first["job"] == "myjob" and first["rank"] == 0 and first["step"] == 0
    assert first["step_time"] == pytest.approx(0.1) and first["compute_time"] == pytest.approx(0.08)
    assert first["group"] == "st0"
    # Cumulated (upper) median step time: steps end 0.102 s apart (0.100..0.103 ms per rank).
    ends = sorted({e["ts"] for e in events})
    assert len(ends) == 3 and ends[1] - ends[0] == pytest.approx(0.102, abs=1e-5)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)


def test_missing_column_is_a_clear_error(tmp_path):
    path = _write_csv(tmp_path / "j.csv", ["worker", "iter"], [[0, 0]])
    mapping = importer.ColumnMap(rank="worker", step="iter", step_time="nope")
    with pytest.raises(importer.TraceImportError, match="no column 'nope'"):
        importer.convert([path], mapping)
    with pytest.raises(importer.TraceImportError, match="rank=COLUMN"):
        importer.mapping_from_args(None, {"step": "iter"})


def test_alibaba_preset_on_a_small_csv(tmp_path):
    rows = [[i, w, 20, t, 500 + 10 * w] for i, (t, w) in enumerate((t, w) for t in (1, 11, 21) for w in range(10))]
    path = _write_csv(tmp_path / "job_9_norm.csv", ["", "worker", "gpu", "time", "batch_time_norm"], rows)
    events = importer.convert([path], importer.PRESETS["alibaba-pai"])
    importer.validate(events)
    e = [x for x in events if x["rank"] == 3 and x["step"] == 11][0]
    assert e["step_time"] == pytest.approx(0.53) and e["ts"] == pytest.approx(1_700_000_011.0)
    assert e["gpu_share"] == 20 and e["job"] == "job_9_norm"


def test_op_level_parquet_aggregates_compute_comm_and_collectives(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="Parquet import needs pyarrow (pip install 'stepwatch[import]')")
    import pyarrow.parquet as pq

    rows = {"rank": [], "stage": [], "dp_rank": [], "step": [], "optype": [], "start_ts": [], "duration": []}

    def op(rank, step, optype, start, dur):
        for k, v in zip(rows, (rank, rank // 2, rank % 2, step, optype, start, dur)):
            rows[k].append(v)

    for step in (5, 6):
        for rank in range(4):
            op(rank, step, "forward-compute", 0.0, 0.2)
            op(rank, step, "backward-compute", 0.3, 0.4)
            op(rank, step, "forward-send", 0.2, 0.1)
            op(rank, step, "optimizer", 0.8, 0.05)
            op(rank, step, "grads-reduce-scatter", 0.7, 0.1)
            op(rank, step, "gc", 0.85, 0.01)
    path = tmp_path / "trace-X.parquet"
    pq.write_table(pa.table(rows), path)
    events = importer.convert([path], importer.PRESETS["bytedance-straggler"], job="x")
    importer.validate(events)
    steps = [e for e in events if e["kind"] == "step"]
    colls = [e for e in events if e["kind"] == "collective"]
    assert len(steps) == 8 and len(colls) == 8
    s = steps[0]
    assert s["compute_time"] == pytest.approx(0.65) and s["comm_time"] == pytest.approx(0.2)
    assert s["step_time"] == pytest.approx(0.86) and s["group"] in ("0", 0)
    # Steps are laid end to end on one clock (their start times restart at 0 in the trace).
    step6 = [e for e in steps if e["step"] == 6]
    assert min(e["ts"] for e in step6) == pytest.approx(1_700_000_000.0 + 0.86 + 0.86, abs=1e-5)
    assert colls[0]["op"] == "reduce_scatter" and colls[0]["duration"] == pytest.approx(0.1)
    assert {c["seq"] for c in colls if c["rank"] == 0} == {1, 2}


def test_written_jsonl_round_trips_through_decode_and_replay(tmp_path):
    rows = [[r, s, 1000 * (1.3 if (r == 5 and s >= 20) else 1.0) + (s * 7 + r * 3) % 11]
            for s in range(60) for r in range(16)]
    path = _write_csv(tmp_path / "j.csv", ["rank", "step", "ms"], rows)
    mapping = importer.mapping_from_args(None, {"rank": "rank", "step": "step", "step_time": "ms"}, time_scale=0.001)
    buf = io.BytesIO()
    n, lines = importer.write_jsonl(importer.convert([path], mapping), buf)
    assert (n, lines) == (960, 60)
    events = []
    for line in buf.getvalue().splitlines():
        good, bad = decode_message(line)
        assert not bad
        events.extend(good)
    alerts = [a for a in replay(events) if a.status == "firing"]
    assert [a.ranks for a in alerts] == [(5,)]
    single = io.BytesIO()
    importer.write_jsonl(importer.convert([path], mapping), single, batch=False)
    assert len(single.getvalue().splitlines()) == 960


def test_cli_import_writes_a_file(tmp_path):
    from stepwatch.cli import main

    path = _write_csv(tmp_path / "j.csv", ["r", "s", "t"], [[r, s, 1.0] for s in range(3) for r in range(4)])
    out = tmp_path / "out.jsonl"
    assert main(["import", str(path), "--col", "rank=r", "--col", "step=s", "--col", "step_time=t",
                 "--job", "J", "-o", str(out)]) == 0
    lines = out.read_bytes().splitlines()
    assert len(lines) == 3 and orjson.loads(lines[0])["events"][0]["job"] == "J"


# -- the real shared traces (../shared/data beside the repository) ----------------------------------


def _shared(rel: str) -> Path:
    path = SHARED / rel
    if not path.exists():
        message = f"shared trace {rel} not found under {SHARED} (CI and the dev machines have ../shared/data " \
                  f"beside the clone)"
        if in_ci():  # CI checkouts have the traces: missing means a broken checkout, not an optional extra
            pytest.fail(message)
        pytest.skip(message)
    return path


def test_missing_shared_traces_fail_in_ci_and_skip_elsewhere(monkeypatch, tmp_path):
    monkeypatch.setattr(__import__(__name__), "SHARED", tmp_path / "no-shared-data")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="not found under"):
        _shared("trace.parquet")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="not found under"):
        _shared("trace.parquet")


@pytest.mark.parametrize("name", ["SE", "ST"])
def test_bytedance_traces_flag_no_individual_straggler(name):
    pytest.importorskip("pyarrow", reason="reading the Parquet traces needs pyarrow (pip install 'stepwatch[import]')")
    path = _shared(f"bytedance-straggler-analysis/trace-{name}.parquet")
    events = importer.convert([path], importer.PRESETS["bytedance-straggler"])
    assert importer.validate(events) > 1000
    steps = [e for e in events if e["kind"] == "step"]
    assert len({e["step"] for e in steps}) >= 30 and all("compute_time" in e and "group" in e for e in steps)
    alerts = list(replay(parse_event(e) for e in events))
    assert [a.summary for a in alerts if a.type == "straggler"] == []


def test_alibaba_job_2_reports_its_persistent_worker_offset_only_as_long_horizon_info():
    path = _shared("alibaba-pai-minibatch/job_2_norm.csv")
    events = importer.convert([path], importer.PRESETS["alibaba-pai"])
    assert importer.validate(events) == 2402
    alerts = list(replay(parse_event(e) for e in events))
    # Worker 5 runs ~9% slower than the others for the whole job (worker 3 ~3%): below the short rule's
    # 10%, steady waste for the long-horizon rule (info, no page); nothing else fires.
    firing = [a for a in alerts if a.status == "firing"]
    assert {(a.type, a.severity, a.evidence.get("horizon")) for a in firing} == {("straggler", "info", "long")}
    assert firing[0].ranks == (5,) and {a.ranks for a in firing} <= {(5,), (3,)}
    assert firing[0].evidence["ratio"] >= 1.05 and firing[0].evidence["gpu_hours_lost_per_day"] > 0


def test_bytedance_st_gives_one_stage_imbalance_naming_the_last_stage():
    pytest.importorskip("pyarrow", reason="reading the Parquet traces needs pyarrow (pip install 'stepwatch[import]')")
    path = _shared("bytedance-straggler-analysis/trace-ST.parquet")
    events = importer.convert([path], importer.PRESETS["bytedance-straggler"])
    firing = [a for a in replay(parse_event(e) for e in events) if a.status == "firing"]
    assert [(a.type, a.evidence["kind"]) for a in firing] == [("imbalance", "stage")]
    ev = firing[0].evidence
    last = max(g["group"] for g in ev["groups"])
    assert ev["slow_groups"] == [last] and ev["groups"][0]["group"] == last
    assert 1.5 <= ev["ratio"] <= 1.7 and ev["action"]["kind"] == "repartition"


def test_alibaba_job_4_gives_the_rank_classes_once_not_straggler_flapping():
    path = _shared("alibaba-pai-minibatch/job_4_norm.csv")
    events = importer.convert([path], importer.PRESETS["alibaba-pai"])
    alerts = list(replay(parse_event(e) for e in events))
    classes = [a for a in alerts if a.type == "imbalance" and a.status == "firing"]
    # Two stable classes from the start (fast ~0.06, slow 0.18-0.30); later two workers move to ~0.95,
    # and the picture changes once to three classes.
    assert [len(a.evidence["classes"]) for a in classes] == [2, 3]
    fast = classes[0].evidence["classes"][-1]
    assert classes[0].evidence["ratio"] >= 3 and {1, 2, 3, 9} <= set(fast["ranks"])
    # Per-rank short alerts: at most one episode per rank (before: 14 firings on 4 ranks, on and off).
    # (one episode: one alert id; a firing whose ratio moved by over 10% is re-published under the same id)
    episodes = {a.id: a.ranks[0] for a in alerts if a.type == "straggler" and a.status == "firing"
                and a.evidence["horizon"] == "short"}
    short = list(episodes.values())
    assert len(short) == len(set(short)) <= 4
