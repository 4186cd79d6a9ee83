"""``stepwatch replay --until/--drain`` bounded (issue 44, "replay --until 1e16 / --drain 1e12 never end"):
beyond 30 days past the recording's last event, one line and exit 2, at once; within, the replay runs."""

from __future__ import annotations

import orjson
import pytest

from stepwatch.cli import main
from stepwatch.commands.replay import MAX_AFTER_SECONDS

END = 1_700_000_000.0


def _recording(path, *, arrival: bool) -> str:
    lines = []
    for step in range(5):
        event = {"v": 1, "kind": "step", "job": "j", "rank": 0, "step": step, "ts": END - 4 + step, "step_time": 1.0}
        if arrival:
            event["_arrival"] = END - 4 + step + 0.01
        lines.append(orjson.dumps(event))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


@pytest.mark.parametrize("flags", [
    ["--until", "1e16"], ["--until", "inf"], ["--until", "nan"], ["--until", "next tuesday"],
    ["--until", str(END + MAX_AFTER_SECONDS + 60)], ["--until", "2999-01-01T00:00:00Z"],
    ["--drain", "1e12"], ["--drain", "-1"], ["--drain", "nan"], ["--drain", "inf"],
    ["--drain", str(MAX_AFTER_SECONDS + 1)],
])
@pytest.mark.parametrize("arrival", [True, False])
def test_an_unbounded_until_or_drain_is_one_line_and_exit_2(tmp_path, capsys, flags, arrival):
    try:  # a value that is no time at all is refused by the argument parser (exit 2), a far one by the bounds
        code = main(["replay", _recording(tmp_path / "r.jsonl", arrival=arrival), *flags])
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    out, err = capsys.readouterr()
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("usage:", " "))]
    assert out == "" and len(lines) == 1 and lines[0].startswith("stepwatch replay: "), err


@pytest.mark.parametrize("flags", [["--until", str(END + 3600)], ["--drain", "600"], ["--until", str(END - 86400)]])
def test_a_bounded_until_or_drain_replays(tmp_path, capsys, flags):
    assert main(["replay", _recording(tmp_path / "r.jsonl", arrival=True), *flags]) == 0
    assert "5 events" in capsys.readouterr().err
