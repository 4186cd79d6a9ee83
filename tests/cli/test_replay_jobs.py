"""``stepwatch replay --jobs N`` (issue 41 item 5): a recording split by job over processes gives one process's
alerts, byte for byte and in its order, on a small recording of two jobs (tests/gen3: two stragglers, a hang) on
the broker's clock (``_arrival``) and on the events' own clock, and the same counts."""

from __future__ import annotations

import zlib

import orjson
import pytest

from gen3.scenarios import scenarios as gen3_scenarios
from gen3.write import build
from stepwatch.cli import main

JOBS = ("two_stragglers", "hang_culprit")


@pytest.fixture(scope="module", params=["arrival", "event-time"])
def recording(request, tmp_path_factory):
    events = []
    for name in JOBS:
        events += [orjson.loads(line) for line in build(next(s for s in gen3_scenarios() if s.name == name))[0]]
    if request.param == "arrival":
        events.sort(key=lambda e: e["_arrival"])
    else:  # an imported trace: no arrival, sorted by event time
        events = sorted(({k: v for k, v in e.items() if k != "_arrival"} for e in events), key=lambda e: e["ts"])
    path = tmp_path_factory.mktemp("jobs") / f"two-{request.param}.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return path


def _replay(capsys, path, jobs: int) -> tuple[str, str]:
    assert main(["replay", "--drain", "900", "--jobs", str(jobs), str(path)]) == 0
    out, err = capsys.readouterr()
    return out, err.splitlines()[-1].split(" in ")[0]  # the counts, without the time taken


def test_two_processes_give_one_process_alerts(recording, capsys):
    jobs = {e["job"] for e in map(orjson.loads, recording.read_bytes().splitlines()) if "job" in e}
    assert len({zlib.crc32(j.encode()) % 2 for j in jobs}) == 2, "each process has a job: the split is exercised"
    one, one_counts = _replay(capsys, recording, 1)
    two, two_counts = _replay(capsys, recording, 2)
    assert len(one.splitlines()) >= 4  # the stragglers and the hang, firing and resolved
    assert two == one
    assert two_counts == one_counts


def test_jobs_out_of_range_is_one_line(recording, capsys):
    assert main(["replay", "--jobs", "0", str(recording)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "stepwatch replay: --jobs must be between 1 and 256, got 0"


def test_a_backtest_split_over_two_processes_says_what_one_says(recording, capsys):
    args = ["backtest", str(recording), "--set", "straggler.ratio_threshold=1.4", "--json"]
    assert main(args) == 0
    one = orjson.loads(capsys.readouterr().out)
    assert main([*args, "--jobs", "2"]) == 0
    assert orjson.loads(capsys.readouterr().out) == one
    assert one["dropped"]  # the candidate changes something: the comparison is not vacuous
