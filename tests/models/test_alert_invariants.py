"""What every alert leaving the pipeline keeps, whatever the recording (issue 40): its ``evidence.resolution`` is a
member of the closed vocabulary (models/resolution.py), put there as the member; and an alert, once out, never
changes: its evidence is read-only (models/alerts.py ``Evidence``) and its JSON at the end of the run is the JSON
it left with (nothing wrote into a nested value either).

The recordings are the alert corpus' (tests/alert_corpus.py): those that reach each resolution the corpus has,
and a seeded draw of the cheap ones; ``STEPWATCH_FULL_CORPUS=1`` sweeps all 168.
"""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
import random
import tempfile
from pathlib import Path

import orjson
import pytest

from alert_corpus import DIGESTS, corpus
from stepwatch.config import Settings
from stepwatch.models.alerts import Alert, Evidence
from stepwatch.models.resolution import Resolution
from stepwatch.recording import merge_recorded, replay

RECORDINGS = {r.name: r for r in corpus()}
#: Each reaches resolutions the others do not: threshold_changed (straggler, comm), job_restarted, job_ended,
#: recovered (hang, straggler episodes), a node incident of a 2-GPU node, link errors resolving.
REACHING = ("gen2/threshold-raised", "gen2/comm-threshold-raised", "library/restart-spare-64",
            "library/checkpoint-stops-16", "library/hang-hang-64", "library/intermittent-64", "gen3/slow_node_2gpu",
            "gen3/straggler_recurs")


def _sample() -> list[str]:
    if os.environ.get("STEPWATCH_FULL_CORPUS"):
        return sorted(RECORDINGS)
    seconds = {name: entry["seconds"] for name, entry in json.loads(DIGESTS.read_text()).items()}
    cheap = sorted(n for n in RECORDINGS if seconds.get(n, 99.0) <= 1.0 and n not in REACHING)
    return [*REACHING, *random.Random(40).sample(cheap, 6)]


class Keeping:
    """Every alert out of the pipeline, with its JSON as it left."""

    def __init__(self) -> None:
        self.seen: list[tuple[Alert, bytes]] = []

    def write(self, out) -> None:
        self.seen.extend((a, a.to_json()) for a in out.alerts)


def _replay(name: str) -> Keeping:
    rec, kept = RECORDINGS[name], Keeping()
    with tempfile.TemporaryDirectory() as folder:  # as the corpus replays it (tests/alert_corpus.py)
        path = Path(folder) / "recording.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in rec.lines()))
        replay(merge_recorded([str(path)]), Settings(), drain=rec.drain, out=io.StringIO(), stats={}, tap=kept)
    return kept


@pytest.mark.parametrize("name", _sample())
def test_alerts_leave_with_a_known_resolution_and_never_change_after(name):
    kept = _replay(name)
    for alert, _ in kept.seen:
        assert type(alert.evidence) is Evidence, f"{name}: {alert.type} {alert.id}"
        if "resolution" in alert.evidence:
            resolution = alert.evidence["resolution"]
            assert type(resolution) is Resolution, f"{name}: {alert.type} {alert.id}: resolution {resolution!r}"
    changed = [a.id for a, left_as in kept.seen if a.to_json() != left_as]
    assert not changed, f"{name}: alerts changed after they left: {changed[:5]}"


def test_the_evidence_refuses_every_write_and_stays_a_dict_to_readers():
    given = {"a": 1, "nested": {"b": [1, 2]}}
    alert = Alert(id="x", status="firing", type="straggler", severity="warning", job="j", ranks=(1,), nodes=("n",),
                  starts_at=1.0, summary="s", evidence=given)
    ev = alert.evidence
    given["a"] = 2  # the caller's dict stays the caller's
    assert ev["a"] == 1 and isinstance(ev, dict) and ev == {"a": 1, "nested": {"b": [1, 2]}}
    writes = [lambda: ev.__setitem__("a", 3), lambda: ev.__delitem__("a"), lambda: ev.update(a=3),
              lambda: ev.setdefault("c", 1), lambda: ev.pop("a"), lambda: ev.popitem(), lambda: ev.clear()]
    for write in writes:
        with pytest.raises(TypeError, match="read-only"):
            write()
    with pytest.raises(TypeError):
        ev |= {"c": 1}
    assert alert.evidence == {"a": 1, "nested": {"b": [1, 2]}}
    # A change is a new alert; copies (the shadow deep-copies an engine) and pickles stay read-only and equal.
    newer = alert.resolved(at=2.0, evidence={**alert.evidence, "resolution": Resolution.RECOVERED})
    assert "resolution" not in alert.evidence and newer.evidence["resolution"] == "recovered"
    for again in (copy.copy(alert), copy.deepcopy(alert), pickle.loads(pickle.dumps(alert))):
        assert again == alert and type(again.evidence) is Evidence
    assert copy.deepcopy(alert).evidence["nested"] is not ev["nested"]
    mutable = ev.copy()
    mutable["a"] = 4
    assert ev["a"] == 1
    assert orjson.loads(alert.to_json())["evidence"] == json.loads(json.dumps(ev)) == {"a": 1, "nested": {"b": [1, 2]}}


@pytest.mark.parametrize("value", [None, "", "resolved", "RECOVERED", 3, ["clean"], *Resolution])
def test_a_resolution_read_back_never_raises(value):
    got = Resolution.of(value, Resolution.CLEAN)
    assert got is (value if isinstance(value, Resolution) else Resolution.CLEAN)
    assert orjson.dumps({"r": got}) == orjson.dumps({"r": got.value})  # the member writes as its value
