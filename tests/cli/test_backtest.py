"""``stepwatch backtest`` (issue 41 item 4): a candidate setting replayed against the current ones on a small labelled
recording: the diff by alert id, each side's precision and recall (feedback labels and a scenario's labels), and
one-line errors for a bad ``--set``, a missing recording and a bad labels file."""

from __future__ import annotations

import orjson
import pytest

from gen3.scenarios import scenarios as gen3_scenarios
from gen3.write import build
from stepwatch.backtest import Labels, diff, score
from stepwatch.cli import main
from stepwatch.sim import scenarios as library


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory):
    """Two gen3 jobs in one recording (one broker stream): a job with two stragglers (ranks 2, 1.32x, and 13,
    1.46x) and a hang; and the current settings' alerts."""
    folder = tmp_path_factory.mktemp("backtest")
    lines = []
    for name in ("two_stragglers", "hang_culprit"):
        lines += [orjson.loads(line) for line in build(next(s for s in gen3_scenarios() if s.name == name))[0]]
    lines.sort(key=lambda e: e["_arrival"])
    path = folder / "two.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in lines))
    return path


def _backtest(capsys, *args) -> tuple[int, dict | str, str]:
    code = main(["backtest", *args])
    out, err = capsys.readouterr()
    return code, (orjson.loads(out) if "--json" in args and code == 0 else out), err


def test_a_candidate_equal_to_the_current_settings_changes_nothing(two_jobs, capsys):
    code, result, _ = _backtest(capsys, str(two_jobs), "--set", "straggler.ratio_threshold=1.10", "--json")
    assert code == 0
    assert (result["new"], result["dropped"], result["changed"]) == ([], [], [])
    assert result["same"] >= 3  # two stragglers and the hang


def test_a_higher_threshold_drops_the_milder_straggler_and_feedback_scores_both_sides(two_jobs, tmp_path, capsys):
    code, current, _ = _backtest(capsys, str(two_jobs), "--set", "straggler.ratio_threshold=1.10", "--json")
    ids = {tuple(a["ranks"]): a["id"] for a in current["dropped"] + current["new"]} or None
    assert code == 0 and ids is None
    code, result, _ = _backtest(capsys, str(two_jobs), "--set", "straggler.ratio_threshold=1.4", "--json")
    assert code == 0
    dropped = [(a["type"], a["ranks"]) for a in result["dropped"]]
    assert dropped == [("straggler", [2])]  # 1.32x is under 1.4 as a warning; 1.46x stays
    assert all(a["type"] != "straggler" or a["ranks"] == [2] for a in result["new"])
    # Feedback: the milder straggler was a false alarm, the other straggler and the hang confirmed.
    mild = result["dropped"][0]["id"]
    from stepwatch.backtest import firing

    code = main(["replay", "--drain", "900", str(two_jobs)])
    alerts = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    verdicts = {i: ("false" if i == mild else "confirmed") for i in firing(alerts)}
    labels = tmp_path / "feedback.jsonl"
    labels.write_bytes(b"".join(orjson.dumps({"alert_id": i, "verdict": v, "by": "sre", "at": 1.0}) + b"\n"
                                for i, v in verdicts.items()))
    code, result, _ = _backtest(capsys, str(two_jobs), "--set", "straggler.ratio_threshold=1.4", "--labels",
                                str(labels), "--json")
    assert code == 0
    known = len(verdicts) - 1
    assert result["current"] == {"true": known, "false": 1, "unlabelled": 0, "precision": round(known / (known + 1), 4),
                                 "recall": 1.0, "found": known, "known": known}
    assert result["candidate"]["false"] == 0 and result["candidate"]["precision"] == 1.0
    assert result["candidate"]["recall"] == 1.0
    # and the text form says the same in a line each
    code, text, _ = _backtest(capsys, str(two_jobs), "--set", "straggler.ratio_threshold=1.4", "--labels", str(labels))
    assert code == 0 and "dropped  straggler warning job two ranks [2]" in text
    assert f"precision {100 * known / (known + 1):.1f}%" in text and "candidate precision 100.0%" in text


def test_scenario_labels_give_recall_per_problem(tmp_path, capsys):
    """A labelled library scenario: its straggler found under the current settings, lost at the highest threshold."""
    recording, label_path = library.write(library.get("straggler-2x-8"), tmp_path)
    code, result, _ = _backtest(capsys, str(recording), "--set", "straggler.ratio_threshold=100", "--labels",
                                str(label_path), "--json", "--drain", "60")
    assert code == 0 and result["labels"] == "problems"
    assert result["current"]["recall"] == 1.0 and result["current"]["precision"] == 1.0
    assert result["candidate"]["found"] < result["current"]["found"]
    assert [a["type"] for a in result["dropped"]].count("straggler") >= 1


def test_diff_matches_by_id_and_names_what_changed():
    a = {"id": "x", "status": "firing", "type": "straggler", "severity": "warning", "job": "j", "ranks": [1],
         "nodes": ["n1"], "evidence": {}}
    b = dict(a, id="y", ranks=[2])
    c = dict(a, severity="critical", nodes=["n2"])
    result = diff([a, b, dict(b, status="resolved")], [c, dict(a, id="z")])
    assert [n["id"] for n in result["new"]] == ["z"]
    assert [d["id"] for d in result["dropped"]] == ["y"]
    assert result["changed"] == [{"id": "x", "type": "straggler", "job": "j", "what": ["severity", "nodes"],
                                  "before": {"severity": "warning", "nodes": ["n1"]},
                                  "after": {"severity": "critical", "nodes": ["n2"]}}]
    # duplicate and transient verdicts count neither way; an alert without feedback is unlabelled
    labels = Labels(verdicts={"x": "confirmed", "y": "duplicate", "w": "transient"})
    assert score([a, b], labels) == {"true": 1, "false": 0, "unlabelled": 0, "precision": 1.0, "recall": 1.0,
                                     "found": 1, "known": 1}


@pytest.mark.parametrize("args, said", [
    (["--set", "straggler.ratio_threshold=0.5"], "ratio_threshold"),
    (["--set", "nosuch.field=1"], "nosuch"),
    (["--set", "ratio_threshold"], "expected SECTION.FIELD=VALUE"),
    (["--set", "straggler.ratio_threshold=1.2", "--labels", "/nonexistent/feedback.jsonl"], "no such file"),
])
def test_a_bad_set_or_labels_file_is_one_line(two_jobs, capsys, args, said):
    code = main(["backtest", str(two_jobs), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("stepwatch backtest: ") and said in err


def test_a_missing_recording_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["backtest", "/nonexistent/rec.jsonl", "--set", "straggler.ratio_threshold=1.2"])
    assert str(exc.value) == "stepwatch backtest: /nonexistent/rec.jsonl: no such file; nothing replayed"


def test_labels_that_are_neither_feedback_nor_a_scenario_are_one_line(two_jobs, tmp_path, capsys):
    bad = tmp_path / "labels.jsonl"
    bad.write_text('{"alert_id": "a", "verdict": "maybe"}\n')
    code = main(["backtest", str(two_jobs), "--set", "straggler.ratio_threshold=1.2", "--labels", str(bad)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "line 1: verdict must be one of" in err
