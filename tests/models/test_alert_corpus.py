"""Behaviour does not change (issue 40): recordings of the scenario library and of the test generators (gen2, gen3)
replayed as ``stepwatch replay`` does print byte-identical alert JSON Lines, by their sha256 kept in
tests/fixtures/alert_corpus.json (computed on the code before the outlet chain; tests/alert_corpus.py).

By default a bounded sample runs (about 40 s): per family, the recordings that print alerts, cheapest first, within
the family's budget of the seconds the digests file records. ``STEPWATCH_FULL_CORPUS=1`` runs all 168 (about 15
minutes): do that after a change to the detection core or the outlet chain. A digest changes only with a change of
behaviour that is meant: then ``python tests/alert_corpus.py --write NAME...`` and say why in the commit.
"""

from __future__ import annotations

import json
import os

import pytest

from alert_corpus import DIGESTS, corpus, digest

#: Seconds of recorded replay time each family's sample may take (the digests file records each one's).
BUDGET = {"library": 18.0, "gen2": 8.0, "gen3": 14.0}
#: The digest of no alert at all: a recording that prints nothing proves little about the outlet.
NOTHING = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

KNOWN = json.loads(DIGESTS.read_text())
RECORDINGS = {r.name: r for r in corpus()}


def _sample() -> list[str]:
    if os.environ.get("STEPWATCH_FULL_CORPUS"):
        return sorted(RECORDINGS)
    chosen = []
    for family, budget in BUDGET.items():
        spent = 0.0
        for name, entry in sorted(KNOWN.items(), key=lambda kv: (kv[1]["seconds"], kv[0])):
            if name.startswith(family + "/") and entry["sha256"] != NOTHING and spent + entry["seconds"] <= budget:
                chosen.append(name)
                spent += entry["seconds"]
    return chosen


def test_every_recording_has_a_digest():
    assert set(RECORDINGS) == set(KNOWN), "run: python tests/alert_corpus.py --write (new or gone recordings)"


def test_the_sample_covers_each_family():
    families = {name.split("/")[0] for name in _sample()}
    assert families == set(BUDGET)


@pytest.mark.parametrize("name", _sample())
def test_alerts_are_byte_identical(name):
    assert digest(RECORDINGS[name]) == KNOWN[name]["sha256"], f"{name}: its alerts changed"
